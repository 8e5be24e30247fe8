"""The built-in synthetic receipts: ``content`` (text), ``layout`` (fonts, word ink) and ``generate``
(pages, files, the command line)."""
