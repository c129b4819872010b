"""Honest reference candidates for DLRM-Bench (class ModelNew; loaded by path)."""
