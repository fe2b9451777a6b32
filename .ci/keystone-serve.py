"""Serve Keystone's public WSGI application on 127.0.0.1 (for banklease's CI).

Like Debian's keystone-wsgi-public, one request at a time: on SQLite, Keystone's threads lock
each other out of the database ("database is locked"). The configuration comes from
OS_KEYSTONE_CONFIG_DIR / OS_KEYSTONE_CONFIG_FILES, as keystone's own WSGI entry point reads it.

Usage: python3 keystone-serve.py PORT
"""
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from keystone.server.wsgi import initialize_public_application


class QuietHandler(WSGIRequestHandler):
    def log_message(self, fmt, *args):  # one line per request, to the log file
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


if __name__ == "__main__":
    port = int(sys.argv[1])
    del sys.argv[1:]  # keystone parses the command line as its own options
    app = initialize_public_application()
    httpd = make_server("127.0.0.1", port, app, server_class=WSGIServer, handler_class=QuietHandler)
    print("keystone-serve: listening on http://127.0.0.1:%d" % port, flush=True)
    httpd.serve_forever()
