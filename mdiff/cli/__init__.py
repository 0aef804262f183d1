"""The command line: parse, call the library, print, exit. No format logic lives here."""
