"""DB training targets: ``db`` assembles the four maps from the polygon ``geometry`` and the
``border`` field."""
