"""Fill banklease's CI Keystone with what the tests and an operator need (idempotent).

Runs after `keystone-manage bootstrap` made the admin, the roles and the identity endpoints.
Makes, through Keystone's v3 API (standard library only):
  - the object-store service, public and internal endpoints in RegionOne -> the Keystone Swift
    proxy (http://127.0.0.1:SWIFT_PORT/v1/AUTH_$(project_id)s), and a public one in region
    RegionTLS -> the same proxy behind the TLS front (https://127.0.0.1:TLS_SWIFT_PORT/...);
  - project `service` with user `swift` (admin role there): the Swift proxy's authtoken user;
  - project `banklease` with user `tester` (member): what the suites use, by name and by id;
  - domain `ops` with project `ops-bank` and user `ops-tester` (member): domains by name and id;
  - an application credential of `tester` on `banklease` (what services are told to use);
  - user `watcher` with only the reader role on `banklease` (Swift lets it read, not write);
  - user `auditor` with only the role `auditor`, which Swift does not know (Swift: 403);
  - project `no-swift` (tester is a member) whose catalog is filtered to the identity endpoint;
  - in each project the container SWIFT_CONTAINER, created with the user's token.
Writes everything as JSON (KEYSTONE_ROOT/test-env.json) and openrc files beside it.

Usage: python3 keystone-bootstrap.py KEYSTONE_URL SWIFT_PORT ROOT ADMIN_PASSWORD CONTAINER TLS_SWIFT_PORT
"""
import json
import os
import sys
import urllib.error
import urllib.request

KS, SWIFT_PORT, ROOT, ADMIN_PASSWORD, CONTAINER, TLS_SWIFT_PORT = sys.argv[1:7]
V3 = KS.rstrip("/") + "/v3"
REGION = "RegionOne"
SWIFT_URL = "http://127.0.0.1:%s/v1/AUTH_$(project_id)s" % SWIFT_PORT
TLS_REGION = "RegionTLS"
TLS_SWIFT_URL = "https://127.0.0.1:%s/v1/AUTH_$(project_id)s" % TLS_SWIFT_PORT
PASSWORDS = {"swift": "swift-secret", "tester": "tester-secret",
             "ops-tester": "ops-secret", "watcher": "watcher-secret",
             "auditor": "auditor-secret"}


def call(method, url, body=None, token=None, ok=(200, 201, 202, 204)):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json")
    if token:
        req.add_header("X-Auth-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, r.headers, (json.loads(raw) if raw.strip().startswith(b"{") else {})
    except urllib.error.HTTPError as e:
        if e.code in ok:
            return e.code, e.headers, {}
        sys.exit("keystone-bootstrap: %s %s -> %d: %s" % (method, url, e.code, e.read()[:300]))


def token(user, password, project, domain="default"):
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"id": domain}, "password": password}}},
        "scope": {"project": {"name": project, "domain": {"id": domain}}}}}
    _, headers, _ = call("POST", V3 + "/auth/tokens", body)
    return headers["X-Subject-Token"]


ADMIN = token("admin", ADMIN_PASSWORD, "admin")


def find(kind, key, **query):
    qs = "&".join("%s=%s" % kv for kv in query.items())
    _, _, got = call("GET", "%s/%s?%s" % (V3, kind, qs), token=ADMIN)
    return got.get(key, [])


def ensure(kind, key, match, create):
    found = find(kind, key, **match)
    if found:
        return found[0]
    _, _, made = call("POST", "%s/%s" % (V3, kind), {key[:-1]: create}, token=ADMIN)
    return made[key[:-1]]


def project(name, domain_id="default"):
    return ensure("projects", "projects", {"name": name, "domain_id": domain_id},
                  {"name": name, "domain_id": domain_id})


def user(name, project_id, role, domain_id="default"):
    u = ensure("users", "users", {"name": name, "domain_id": domain_id},
               {"name": name, "domain_id": domain_id, "password": PASSWORDS[name],
                "enabled": True})
    # A rerun after a test disabled or changed a user puts it back.
    call("PATCH", "%s/users/%s" % (V3, u["id"]),
         {"user": {"enabled": True, "password": PASSWORDS[name]}}, token=ADMIN)
    call("PUT", "%s/projects/%s/users/%s/roles/%s" % (V3, project_id, u["id"], ROLES[role]),
         token=ADMIN)
    return u


ROLES = {r["name"]: r["id"] for r in find("roles", "roles")}
for needed in ("admin", "member", "reader"):
    if needed not in ROLES:
        sys.exit("keystone-bootstrap: role %s missing (did keystone-manage bootstrap run?)" % needed)

service = ensure("services", "services", {"type": "object-store"},
                 {"type": "object-store", "name": "swift", "enabled": True})
endpoints = find("endpoints", "endpoints", service_id=service["id"])
# (Keystone's region listing filters by parent only: look the region up by its id.)
if call("GET", "%s/regions/%s" % (V3, TLS_REGION), token=ADMIN, ok=(200, 404))[0] == 404:
    call("POST", V3 + "/regions", {"region": {"id": TLS_REGION}}, token=ADMIN)
for region, interface, url in ((REGION, "public", SWIFT_URL), (REGION, "internal", SWIFT_URL),
                               (TLS_REGION, "public", TLS_SWIFT_URL)):
    if not any(e["interface"] == interface and e["region_id"] == region for e in endpoints):
        call("POST", V3 + "/endpoints", {"endpoint": {
            "service_id": service["id"], "interface": interface, "region_id": region,
            "url": url, "enabled": True}}, token=ADMIN)

service_project = project("service")
user("swift", service_project["id"], "admin")
bank = project("banklease")
tester = user("tester", bank["id"], "member")
ops = ensure("domains", "domains", {"name": "ops"}, {"name": "ops", "enabled": True})
ops_bank = project("ops-bank", ops["id"])
ops_tester = user("ops-tester", ops_bank["id"], "member", ops["id"])
watcher = user("watcher", bank["id"], "reader")
ROLES["auditor"] = ensure("roles", "roles", {"name": "auditor"}, {"name": "auditor"})["id"]
user("auditor", bank["id"], "auditor")
no_swift = project("no-swift")
call("PUT", "%s/projects/%s/users/%s/roles/%s" % (V3, no_swift["id"], tester["id"],
                                                 ROLES["member"]), token=ADMIN)
identity = find("services", "services", type="identity")[0]
identity_public = [e for e in find("endpoints", "endpoints", service_id=identity["id"])
                   if e["interface"] == "public"][0]
# 409 on a rerun: the association is there already.
call("PUT", "%s/OS-EP-FILTER/projects/%s/endpoints/%s" % (V3, no_swift["id"],
                                                         identity_public["id"]), token=ADMIN,
     ok=(200, 201, 204, 409))

# The application credential: made by the user itself, on a token scoped to its project. A
# rerun replaces the one of the same name (its secret is shown only when it is made).
tester_token = token("tester", PASSWORDS["tester"], "banklease")
name = "banklease-ci"
_, _, existing = call("GET", "%s/users/%s/application_credentials?name=%s" % (
    V3, tester["id"], name), token=tester_token)
for cred in existing.get("application_credentials", []):
    call("DELETE", "%s/users/%s/application_credentials/%s" % (V3, tester["id"], cred["id"]),
         token=tester_token)
_, _, made = call("POST", "%s/users/%s/application_credentials" % (V3, tester["id"]),
                  {"application_credential": {"name": name}}, token=tester_token)
app_cred = made["application_credential"]


def swift_put_container(user_token, project_id):
    url = SWIFT_URL.replace("$(project_id)s", project_id) + "/" + CONTAINER
    call("PUT", url, token=user_token)


swift_put_container(tester_token, bank["id"])
swift_put_container(token("ops-tester", PASSWORDS["ops-tester"], "ops-bank", ops["id"]),
                    ops_bank["id"])

env = {
    "auth_url": V3, "region": REGION, "container": CONTAINER,
    "storage_url": SWIFT_URL.replace("$(project_id)s", bank["id"]),
    "admin": {"username": "admin", "password": ADMIN_PASSWORD, "project_name": "admin"},
    "tester": {"username": "tester", "user_id": tester["id"], "password": PASSWORDS["tester"],
               "project_name": "banklease", "project_id": bank["id"]},
    "ops": {"username": "ops-tester", "user_id": ops_tester["id"],
            "password": PASSWORDS["ops-tester"], "domain_name": "ops", "domain_id": ops["id"],
            "project_name": "ops-bank", "project_id": ops_bank["id"]},
    "app_cred": {"id": app_cred["id"], "name": name, "secret": app_cred["secret"],
                 "user_id": tester["id"]},
    "watcher": {"username": "watcher", "password": PASSWORDS["watcher"],
                "project_name": "banklease"},
    "auditor": {"username": "auditor", "password": PASSWORDS["auditor"],
                "project_name": "banklease"},
    "no_swift": {"project_name": "no-swift", "project_id": no_swift["id"]},
}
with open(os.path.join(ROOT, "test-env.json"), "w") as f:
    json.dump(env, f, indent=2)


def openrc(path, lines):
    with open(os.path.join(ROOT, path), "w") as f:
        f.write("".join("export %s=%s\n" % kv for kv in lines))


common = [("OS_AUTH_URL", V3), ("OS_IDENTITY_API_VERSION", "3"), ("OS_REGION_NAME", REGION),
          ("OS_INTERFACE", "public")]
openrc("openrc", common + [
    ("OS_USERNAME", "tester"), ("OS_PASSWORD", PASSWORDS["tester"]),
    ("OS_USER_DOMAIN_NAME", "Default"), ("OS_PROJECT_NAME", "banklease"),
    ("OS_PROJECT_DOMAIN_NAME", "Default")])
openrc("app-cred-openrc", common + [
    ("OS_AUTH_TYPE", "v3applicationcredential"),
    ("OS_APPLICATION_CREDENTIAL_ID", app_cred["id"]),
    ("OS_APPLICATION_CREDENTIAL_SECRET", app_cred["secret"])])
print("keystone-bootstrap: done (project banklease %s, application credential %s)" % (
    bank["id"], app_cred["id"]))
