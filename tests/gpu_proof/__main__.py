"""``python -m tests.gpu_proof [options]``: what ``scripts/gpu_proof.sh`` runs."""

import sys

from tests.gpu_proof.run import main

sys.exit(main())
