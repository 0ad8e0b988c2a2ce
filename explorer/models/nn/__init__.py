"""Layers and losses shared by several methods."""
