"""The one exception type users see.

Every error the user can cause (a bad flag, a malformed file, a model that does not fit) is raised
as an ``InferplanError`` with a one-line message that names the file, line or flag and what would
be valid. The CLI prints it and exits non-zero; nothing else is allowed to reach the user as a
traceback.
"""


class InferplanError(Exception):
    """A user-facing error: ``str(err)`` is the one line the CLI prints."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class DoesNotFitError(InferplanError):
    """The model, its KV cache or one max-length sequence does not fit the devices (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)
