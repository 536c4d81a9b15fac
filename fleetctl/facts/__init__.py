"""Gathering facts: the facts script that runs on a host, and where host scripts live."""
