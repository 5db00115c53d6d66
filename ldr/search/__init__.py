from .hits import Hit

__all__ = ["Hit"]
