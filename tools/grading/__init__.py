"""The pieces of tools/grade: Catch2's output (catch2), running test binaries with time
limits and crash isolation (running), the Meson build and its errors (building), the
points table and the report files (reports), and grading a student's submission in a
clean copy of the course (submission)."""


class UsageError(Exception):
    """A command line or input that cannot be graded: one line says why (exit status 2)."""
