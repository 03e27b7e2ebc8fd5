"""GUA Board: the multi-tenant web service behind the GPU usage agents."""

__version__ = "0.1.0"
