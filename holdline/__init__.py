"""holdline's importable package: the typed Agent API client (`holdline.client`) and the
framework adapters built on it (`holdline.integrations`). Neither imports the runtime."""
