"""The hypothesis board: states, evidence, rule and manual verdicts, full history."""
