"""Examples of a user's own tools: outside the core, registered like anyone's would be."""
