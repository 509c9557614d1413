"""Errors that are the user's to fix: printed as one line, exit code 2."""


class UserError(Exception):
    """A mistake in the user's input (flags, config, files); never a bug of ours."""
