"""Tiny models for ptebuild's tests: a few hundred parameters, lowered in seconds."""
