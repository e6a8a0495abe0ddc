"""What every runtime layer uses: the user-fixable error, commands and sysctls on this
machine, and the record of what a run created."""
