"""``python -m ocr.doctor [--json] [--out DIR]``: the doctor's command line."""

import sys

from ocr.doctor.cli import main

sys.exit(main())
