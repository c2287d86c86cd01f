"""batch-coordinator: batch membership, drain detection, one closing delivery per batch."""
