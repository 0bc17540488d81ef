"""One file per variant; every module here is imported by ``tfspec.registry``."""
