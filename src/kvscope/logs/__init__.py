"""Engine-neutral log reading: the line grammar both engines' log parsers are built on."""
