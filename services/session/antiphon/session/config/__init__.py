"""A session's configuration: as it is now, merged and validated, the functions
it declares, and what it decides."""
