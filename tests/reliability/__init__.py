"""Reliability tests (issue 12): iron as an adversarial user or a damaged disk meets it."""
