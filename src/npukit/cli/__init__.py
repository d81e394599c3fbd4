"""The ``npukit`` command line. Each ``cmd_<name>.py`` module here defines ``register(subparsers)``
and is discovered automatically, so adding a subcommand never edits a shared file."""
