"""What a finding is made of: the summary, severity, fatal errors, the reproducer and its graph drawing."""
