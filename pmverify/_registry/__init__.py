"""Recording pattern entries as a pass registers them (record), their gates, and Inductor's passes."""
