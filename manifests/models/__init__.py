"""Example models for the manifests in this folder."""
