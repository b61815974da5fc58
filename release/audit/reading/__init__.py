"""Reading a wheel as hostile input: the zip reader and its budget, the member sorting, the installer's view
(names, RECORD, identity), build paths in text members, and one inspection of every ELF and device code file."""
