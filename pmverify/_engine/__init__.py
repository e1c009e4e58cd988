"""Running a pass on a case and judging it: apply (eager), compiled, check (one case), verify (a search)."""
