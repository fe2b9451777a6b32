"""Serve Keystone's public WSGI application on 127.0.0.1 (for banklease's CI).

Pre-forked worker processes (KEYSTONE_WORKERS, default 3), each serving one request at a time
on the shared listening socket: on SQLite, threads in one Keystone process lock each other out
of the database ("database is locked"), processes on a WAL database do not; and one process
alone queues Swift's token validations behind password hashing. The configuration comes from
OS_KEYSTONE_CONFIG_DIR / OS_KEYSTONE_CONFIG_FILES, as keystone's own WSGI entry point reads it.

Usage: python3 keystone-serve.py PORT
"""
import os
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from keystone.server.wsgi import initialize_public_application


class QuietHandler(WSGIRequestHandler):
    def log_message(self, fmt, *args):  # one line per request, to the log file
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


if __name__ == "__main__":
    port = int(sys.argv[1])
    del sys.argv[1:]  # keystone parses the command line as its own options
    workers = int(os.environ.get("KEYSTONE_WORKERS", "3"))
    httpd = make_server("127.0.0.1", port, None, server_class=WSGIServer,
                        handler_class=QuietHandler)
    print("keystone-serve: listening on http://127.0.0.1:%d (%d workers)" % (port, workers),
          flush=True)
    # The children share the listening socket and die with the process group (setsid'd by
    # the start script, stopped as a group).
    for _ in range(workers - 1):
        if os.fork() == 0:
            break
    # Each process its own application (and database connections): none crosses a fork.
    httpd.set_app(initialize_public_application())
    httpd.serve_forever()
