"""Adversarial tests against a live `gua-board serve --workers 2`."""
