"""Checking one recorded rewrite or Inductor pattern entry: check_rewrite, Inductor's table, check_entry."""
