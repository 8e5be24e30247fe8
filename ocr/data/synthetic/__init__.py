"""The built-in synthetic receipts: ``content`` (basic-style text), ``receipt`` (the dense style),
``layout`` (packaged fonts, word ink), ``marks`` (ink without boxes) and ``generate`` (pages, files,
the command line; ``python -m ocr.data.synthetic``)."""
