"""The research domain: multi-hop questions over a fictional encyclopedia, offline (README.md)."""
