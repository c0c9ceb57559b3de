"""The error of a guarded function that cannot be compiled, in a module of its own so that _compiled.py
(which guard.py imports lazily) imports no part of guard.py: no import cycle between the two."""


class GuardCompileError(BaseException):
    """Raised when a decorated function cannot become one op under torch.compile(fullgraph=True)
    (_compiled.py): names the op and the way out (g.custom_op with a fake). A BaseException on purpose:
    Dynamo replaces every Exception raised while it traces with its own error and drops the text; catch it
    by name."""

    __module__ = "ringguard.guard"  # its name as before the move (tracebacks, pickling)
