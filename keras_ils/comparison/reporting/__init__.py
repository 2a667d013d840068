"""Reporting: average ranks, the Friedman test, critical differences and CD diagrams; the paper's printed tables."""
