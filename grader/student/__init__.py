"""What students get: ``grader validate``, the self-check that the student release carries (the student kit)."""
