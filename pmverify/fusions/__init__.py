"""Fusion passes shipped with pmverify, each verified by pmverify's own strategies."""
