"""moto's S3 server, answering one request at a time.

`moto_server` runs werkzeug with a thread per request, and moto 5.2 checks `If-Match` /
`If-None-Match: *` on PutObject and then stores the object without a lock: two conditional
PUTs racing on one key can both pass the check, and one update is lost (seen in
tests/conformance: a concurrent edit lost about one run in three). Real S3, GCS and Azure
make the check and the write one atomic step. Served one request at a time, moto does too,
so the tests of "no lost update" test mountfs, not moto's threads.

Usage: python3 moto_serial.py HOST PORT
"""

import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, app, threaded=False, processes=1)


if __name__ == "__main__":
    main()
