"""The product channel's verdicts, what each guard contributes, and release gates."""
