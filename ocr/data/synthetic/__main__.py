"""``python -m ocr.data.synthetic``: the generator's command line (see :func:`generate.main`)."""

from ocr.data.synthetic.generate import main

raise SystemExit(main())
