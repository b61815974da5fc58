"""Rendering audit results: text, JSON and markdown (``render``), the HTML page (``page``), the device code
inventory and the audit record. Renderers only read results; they decide nothing."""
