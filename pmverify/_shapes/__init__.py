"""Symbolic sizes: hinted symbols for dynamic shapes, and size arithmetic on them."""
