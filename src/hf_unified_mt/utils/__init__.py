"""Helpers every layer of the package shares and no model needs: writing files safely (`files`), reading option
files (`options`)."""
