"""Horovod's ``horovod.common`` paths that scripts import from directly."""
