"""Results: the files a run writes (CSV with units in the header, appended so that no
experiment overwrites another's rows), statistics over them, and the plots drawn from them."""
