"""--profile: what the credentials SDK says when a profile gives no keys may quote the whole server answer it
got (alibabacloud_credentials: OAuthCredentialsProvider's "failed to refresh OAuth token: <body>" for an
answer without refresh_token, RamRoleArnCredentialsProvider's "error retrieving credentials from ram_role_arn
result: <body>" for an STS answer missing a field, ExternalCredentialsProvider's "exit status N\\nstderr:
<stderr>"). That answer can hold a new access token or STS key, so nothing the command prints may repeat it.

The External mode is the SDK's real path here: the profile's ``process_command`` is a local script that
fails and writes such an answer on stderr, and the SDK quotes it in its CredentialException. The OAuth and
RamRoleArn endpoints are fixed cloud hosts (no loopback emulator can stand in), so their messages reach the
command through the same CredentialException, raised by the real SDK from the External profile.
"""

import json
import sys

import pytest

from functions.commands import main as cli
from tests.support.cli_errors import error_text

ACCESS_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJlLW9mLXRoZS1uZXctdG9rZW4"
CLUSTER = "c3f5e8a1d2b4c6e8f0a1b3c5d7e9f1a2b"
STS_SECRET = "Hk3vQz8sWm2LpX9rTy6bNc4dFg7jKa1e"
STS_KEY_ID = "STS.NUgYrLnoC37mZZCNnAbez2ZZg"
# What the SDK quotes: the OAuth sign-in service's answer without refresh_token, and STS AssumeRole's answer
# without SecurityToken (the field names are the services' own, as the SDK reads them).
OAUTH_ANSWER = {"access_token": ACCESS_TOKEN, "token_type": "Bearer", "expires_in": 3600}
STS_ANSWER = {"Credentials": {"AccessKeySecret": STS_SECRET, "AccessKeyId": STS_KEY_ID,
                               "Expiration": "2026-12-07T23:00:00Z"},
              "RequestId": "6894B13B-6D71-4EF5-88FA-F32781734A7F"}


@pytest.fixture
def home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    for name in ("ALIBABA_CLOUD_PROFILE", "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                 "ALIBABA_CLOUD_SECURITY_TOKEN", "ACK_MIG_REGION"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _failing_profile(home, answer):
    script = home / "creds.py"
    script.write_text("import sys\nsys.stderr.write(%r)\nsys.exit(1)\n" % json.dumps(answer))
    (home / ".aliyun").mkdir()
    (home / ".aliyun" / "config.json").write_text(json.dumps({"current": "ops", "profiles": [
        {"name": "ops", "mode": "External", "process_command": "%s %s" % (sys.executable, script),
         "region_id": "cn-beijing"}]}))


@pytest.mark.parametrize("answer, secrets", [(OAUTH_ANSWER, [ACCESS_TOKEN]), (STS_ANSWER, [STS_SECRET])],
                         ids=["oauth-refresh-answer", "sts-answer"])
def test_a_profile_whose_provider_quotes_a_token_is_said_without_it(home, capsys, answer, secrets):
    _failing_profile(home, answer)
    code = cli.main(["wait", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--poll", "0",
                     "--profile", "ops"])
    out, err = capsys.readouterr()
    text = error_text(err)
    assert code == 2 and "--profile ops gave no credentials: failed to execute external command" in text, text
    assert "***" in text, text  # the answer is still quoted, its secret values masked
    for secret in secrets:
        for cut in (secret, secret[:16]):  # whole, or the part a wrapped or clipped line keeps
            assert cut not in out + err, err


def test_the_json_error_object_is_masked_too(home, capsys):
    _failing_profile(home, OAUTH_ANSWER)
    code = cli.main(["wait", "--cluster-id", CLUSTER, "--region", "cn-beijing", "--poll", "0",
                     "--profile", "ops", "-o", "json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 2 and doc["exit_code"] == 2 and "gave no credentials" in doc["error"], out
    assert ACCESS_TOKEN[:16] not in out + err


def test_the_top_level_error_printer_masks_secret_shapes(capsys):
    """main.report: every error line goes through the redactor, whoever raised it (the SDK's class)."""
    from alibabacloud_credentials.exceptions import CredentialException

    exc = CredentialException("failed to refresh OAuth token: %s" % json.dumps(OAUTH_ANSWER))
    exc.exit_code = 2
    assert cli.report(exc) == 2
    err = capsys.readouterr().err
    assert "failed to refresh OAuth token" in err and ACCESS_TOKEN[:16] not in err, err
    assert cli.report(CredentialException("error retrieving credentials from ram_role_arn result: %s"
                                          % json.dumps(STS_ANSWER))) == 70  # a bug's line: masked as well
    err = capsys.readouterr().err
    assert "internal error" in err and STS_SECRET[:16] not in err, err


def test_every_printed_line_is_masked_whole_before_it_is_wrapped():
    """The streams a command prints to (main._human_output): a line written in pieces (print's text, then its
    newline; a name and its value in two writes) is masked whole, and before the 80-column wrap that would
    part a token from its name."""
    import io

    from functions.commands.terminal import Fitted, Redacted

    sink = io.StringIO()
    stream = Redacted(Fitted(sink, columns=80))
    stream.write("warning: the sign-in service answered " + "x" * 40 + ' {"access_token": ')
    stream.write('"%s", "expires_in": 3600}\n' % ACCESS_TOKEN)
    stream.write("STS token CAIS" + "A" * 80)
    stream.flush()
    text = sink.getvalue()
    assert '"access_token":' in text and "***" in text and ACCESS_TOKEN[:16] not in text, text
    assert "CAISAAAA" not in text and text.endswith("STS token ***"), text
