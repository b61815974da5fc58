"""The indexes publish talks to: the client that reads them (listings, downloads, one deadline per
request), the local index a rehearsal runs (server, its upload check, its leases), a static index
folder. Nothing here decides whether a release may go out: that is :mod:`release.publish.guards`."""
