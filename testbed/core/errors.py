"""The error a user can fix (a missing tool, not root, a busy machine): one line naming the
fix, no traceback."""


class TestbedError(RuntimeError):
    """An error the user can fix; the message is one line naming the fix."""

    __test__ = False  # not a pytest test class, despite its name
