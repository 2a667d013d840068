"""Reporting: the results' tables and files, the seeds' summary, the paired verdict; ranks and the Friedman test."""
