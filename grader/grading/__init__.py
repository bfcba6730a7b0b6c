"""Judging submissions: intake, the sandbox and what runs in it, plain data across, the verdict, the
gradebook, reports."""
