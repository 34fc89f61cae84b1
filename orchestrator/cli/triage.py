"""`orchestrate triage`: filled in by its issue-11 work."""
