"""The command line's exit codes, and which of them a cloud API's refusal gets.

Every command that talks to the cloud ends with one of these (docs/cli.md, "Exit codes", shows the same
table; a test compares them): the same cause gives the same code in every command.

A refusal is sorted by the error code the service answered, the way the services document them:

* the credentials were refused (the caller must fix what it signs with): ``InvalidAccessKeyId`` (and its
  ``.NotFound`` / ``.Inactive`` forms), ``SignatureDoesNotMatch`` (a wrong secret), ``IncompleteSignature``,
  ``InvalidSecurityToken`` (``.Expired``, ``.Malformed``, ``.MismatchWithAccessKey``: a missing, expired or
  foreign STS token), ``SecurityTokenExpired`` (OSS), ``InvalidAccessKeySecret``. These are the POP gateway's
  common error codes (Alibaba Cloud "Common error codes" of the RPC and ROA APIs) and OSS's "Error responses";
* the action was refused for this identity (a RAM policy lacks it): ``Forbidden.RAM``, ``Forbidden``,
  ``Forbidden.NoPermission``, ``NoPermission``, ``NotAuthorized``, ``AccessDenied`` (OSS);
* anything else keeps the caller's default (1: the operation failed).
"""

import re
from typing import Optional, Tuple

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STRICT = 3
EXIT_CREDENTIALS = 4
EXIT_PERMISSION = 5
EXIT_CONFLICT = 6
EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE: a bug
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_PIPE = 141  # 128 + SIGPIPE

# (code, when): docs/cli.md's table, row by row.
EXIT_CODES: Tuple[Tuple[int, str], ...] = (
    (EXIT_OK, "done (doctor: no PROBLEM; deploy --dry-run: the plan was computed)"),
    (EXIT_FAILED, "the operation ran and failed: a stack that ended failed or rolled back, a node that failed, "
                  "a doctor PROBLEM, a package that cannot be built, a cloud API that kept failing; its output "
                  "could not be written (> /dev/full)"),
    (EXIT_USAGE, "usage or input: an option, argument, file, setting or template parameter is wrong or missing, "
                 "no credentials were found, a confirmation was refused or cannot be asked, stdout is closed "
                 "(>&-); an API nothing answers at, found by the first connection or by a call that could not "
                 "connect"),
    (EXIT_STRICT, "invoke --strict: a decision ended error or a node failed"),
    (EXIT_CREDENTIALS, "the cloud refused the credentials: unknown access key, wrong secret, missing or expired "
                       "STS token"),
    (EXIT_PERMISSION, "the cloud refused the action for this identity: a RAM permission is missing"),
    (EXIT_CONFLICT, "the cloud's state stops the command: a stack being changed or whose creation failed, a code "
                    "bucket of another account or not private"),
    (EXIT_INTERNAL, "internal error: a bug (ACK_MIG_HOOK_DEBUG=1 shows the traceback)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
    (EXIT_PIPE, "the reader of the output went away (`... | head`)"),
)

CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "IncompleteSignature", "InvalidSecurityToken",
                    "SecurityTokenExpired", "InvalidAccessKeySecret")
PERMISSION_CODES = ("Forbidden", "NoPermission", "NotAuthorized", "AccessDenied")
_CODE_WORD = re.compile(r"\b(%s)(\.[A-Za-z]+)*\b" % "|".join(CREDENTIAL_CODES + PERMISSION_CODES))


def exit_code_for(code: str, default: int = EXIT_FAILED) -> int:
    """The exit code of a refusal whose service error code is ``code`` (``Forbidden.RAM`` -> 5)."""
    head = str(code or "").split(".", 1)[0]
    if head in CREDENTIAL_CODES:
        return EXIT_CREDENTIALS
    if head in PERMISSION_CODES:
        return EXIT_PERMISSION
    return default


def code_in_text(text: str) -> Optional[str]:
    """The first credential or permission error code a message quotes, e.g. ``SignatureDoesNotMatch`` in
    ``DescribeClusterNodePools failed: 400 SignatureDoesNotMatch: ...``; None when it quotes none."""
    found = _CODE_WORD.search(str(text or ""))
    return found.group(0) if found else None


HINTS = {
    EXIT_CREDENTIALS: "check the access key and secret (and the STS token of temporary keys) that --profile, the "
                      "ALIBABA_CLOUD_* environment or the instance role provide",
    EXIT_PERMISSION: "grant the missing action to this identity in RAM (docs/deploy.md, Prerequisites)",
}


def explain(text: str, default: int) -> "tuple":
    """(exit code, message) for an error line that may quote a cloud refusal: the code it quotes decides
    (:func:`exit_code_for`) and the message gets that code's hint; else ``default`` and the text as is."""
    quoted = code_in_text(text)
    code = exit_code_for(quoted, default) if quoted else default
    hint = HINTS.get(code) if quoted else None
    return code, ("%s; %s" % (text, hint) if hint and hint not in text else text)


class CloudError(RuntimeError):
    """A cloud API refused or failed a call: one line with the service's code, and the exit code that code
    gets (:func:`exit_code_for`); ``default`` for every other code."""

    default = EXIT_FAILED

    def __init__(self, message: str, code: str = "", exit_code: Optional[int] = None) -> None:
        self.code = code
        self.exit_code = exit_code if exit_code is not None else exit_code_for(code, self.default)
        hint = HINTS.get(self.exit_code) if exit_code is None else None
        super().__init__("%s; %s" % (message, hint) if hint and hint not in message else message)
