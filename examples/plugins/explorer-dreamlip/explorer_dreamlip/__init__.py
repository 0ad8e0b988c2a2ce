"""DreamLIP for explorer: the method class is ``explorer_dreamlip.method.DreamLipMethod``."""

from explorer_dreamlip.method import DreamLipMethod

__all__ = ["DreamLipMethod"]
