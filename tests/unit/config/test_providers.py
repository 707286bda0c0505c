"""Credentials by reference: MM2's config providers (file, env, directory) resolved at load time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from config_texts import ONE_FLOW

from mirrorflow.config.model import MirrorConfig, load_config, parse_config
from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError

FILE = "org.apache.kafka.common.config.provider.FileConfigProvider"
ENV = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
DIRECTORY = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
PROVIDERS = f"""\
config.providers = file, env, dir
config.providers.file.class = {FILE}
config.providers.env.class = {ENV}
config.providers.dir.class = {DIRECTORY}
"""
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"
SECRET = "s3cr3t-Value"


def load(folder: Path, text: str, env: dict[str, str] | None = None) -> MirrorConfig:
    path = folder / "mm2.properties"
    path.write_text(ONE_FLOW + text)
    return load_config(path, env=env or {})


def load_error(folder: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(folder, text, env)
    assert SECRET not in str(caught.value)
    return str(caught.value)


@pytest.fixture
def creds(tmp_path: Path) -> Path:
    path = tmp_path / "secrets" / "mirror.properties"
    path.parent.mkdir()
    path.write_text(f"username = mirror\npassword = {SECRET}\n")
    return path


def test_a_file_reference_inside_the_jaas_config_reaches_every_client_of_the_cluster(
    tmp_path: Path, creds: Path
) -> None:
    config = load(
        tmp_path,
        PROVIDERS + f'primary.sasl.jaas.config = {SCRAM} username="${{file:{creds}:username}}" '
        f'password="${{file:{creds}:password}}";\n',
    )

    jaas = f'{SCRAM} username="mirror" password="{SECRET}";'
    (flow,) = config.flows
    for props in (flow.source.client, flow.source.consumer, flow.source.producer, flow.source.admin):
        assert props["sasl.jaas.config"] == jaas
    assert config.clusters["primary"].client["sasl.jaas.config"] == jaas
    # The declarations are consumed: nothing downstream sees them.
    assert not [key for key in flow.properties if key.startswith("config.providers")]


def test_a_relative_path_is_relative_to_the_config_files_folder(tmp_path: Path, creds: Path) -> None:
    config = load(
        tmp_path, PROVIDERS + "primary.sasl.jaas.config = ${file:secrets/mirror.properties:password}\n"
    )

    assert config.clusters["primary"].client["sasl.jaas.config"] == SECRET


@pytest.mark.parametrize(
    "reference", ["${env:MIRROR_PW}", "${env::MIRROR_PW}"], ids=["no-path", "empty-path"]
)
def test_an_env_reference_reads_the_variable_with_or_without_the_empty_path(
    tmp_path: Path, reference: str
) -> None:
    config = load(
        tmp_path, PROVIDERS + f"primary.sasl.jaas.config = {reference}\n", env={"MIRROR_PW": SECRET}
    )

    assert config.clusters["primary"].client["sasl.jaas.config"] == SECRET


def test_a_directory_reference_reads_a_whole_file_and_the_value_is_trimmed_as_kafka_does(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "mounted"
    folder.mkdir()
    (folder / "password").write_text(f"{SECRET}\n")

    config = load(tmp_path, PROVIDERS + f"primary.sasl.jaas.config = ${{dir:{folder}:password}}\n")

    assert config.clusters["primary"].client["sasl.jaas.config"] == SECRET


def test_references_resolve_in_any_key_and_a_resolved_value_is_never_resolved_again(
    tmp_path: Path, creds: Path
) -> None:
    creds.write_text("password = ${env:MIRROR_PW}\nuser = mirror\n")

    config = load(
        tmp_path,
        PROVIDERS
        + f"primary.sasl.jaas.config = ${{file:{creds}:password}}\n"
        + "mirrorflow.offsets.db.url = postgresql+psycopg2://${file:secrets/mirror.properties:user}:"
        + "${env:DB_PW}@db:5432/mirror\n",
        env={"MIRROR_PW": "not read", "DB_PW": "pw"},
    )

    assert config.clusters["primary"].client["sasl.jaas.config"] == "${env:MIRROR_PW}"
    assert config.offsets_db_url == "postgresql+psycopg2://mirror:pw@db:5432/mirror"


def test_without_references_nothing_is_read_and_text_without_a_colon_is_no_reference(
    tmp_path: Path,
) -> None:
    config = load(tmp_path, "mirrorflow.spark.conf.spark.driver.extraJavaOptions = -Dx=${spark.y}\n")

    assert config.flows[0].settings.spark_conf == {"spark.driver.extraJavaOptions": "-Dx=${spark.y}"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "primary.sasl.jaas.config = ${file:/nowhere/creds.properties:password}\n",
            "primary.sasl.jaas.config: ${file:/nowhere/creds.properties:password}: the credentials file "
            "/nowhere/creds.properties does not exist",
        ),
        (
            "primary.sasl.jaas.config = ${file:secrets/mirror.properties:pasword}\n",
            "primary.sasl.jaas.config: ${file:secrets/mirror.properties:pasword}: the credentials file "
            "{tmp}/secrets/mirror.properties has no key 'pasword'",
        ),
        (
            "primary.sasl.jaas.config = ${env:MIRROR_PW}\n",
            "primary.sasl.jaas.config: ${env:MIRROR_PW}: environment variable MIRROR_PW is not set; set it "
            "for every process that loads this config (Airflow's DAG processor and workers, and the Spark "
            "driver)",
        ),
        (
            "primary.sasl.jaas.config = ${env:/etc:MIRROR_PW}\n",
            "primary.sasl.jaas.config: ${env:/etc:MIRROR_PW}: EnvVarConfigProvider takes no path; write "
            "${env:MIRROR_PW}",
        ),
        (
            "primary.sasl.jaas.config = ${file:password}\n",
            "primary.sasl.jaas.config: ${file:password} has no path; write ${file:<path>:<key>}",
        ),
        (
            "primary.sasl.jaas.config = ${dir:{tmp}/nowhere:password}\n",
            "primary.sasl.jaas.config: ${dir:{tmp}/nowhere:password}: the folder {tmp}/nowhere does not "
            "exist",
        ),
        (
            "primary.sasl.jaas.config = ${dir:{tmp}:secrets/mirror.properties}\n",
            "primary.sasl.jaas.config: ${dir:{tmp}:secrets/mirror.properties}: "
            "'secrets/mirror.properties' is not a file name",
        ),
        (
            "primary.sasl.jaas.config = ${vault:/secret/kafka:password}\n",
            "primary.sasl.jaas.config: ${vault:/secret/kafka:password} refers to config provider 'vault', "
            "which is not declared in config.providers (declared: file, env, dir); declare it with "
            "config.providers and config.providers.vault.class",
        ),
    ],
    ids=[
        "missing-file",
        "missing-key",
        "missing-variable",
        "env-with-path",
        "file-without-path",
        "missing-folder",
        "not-a-file-name",
        "undeclared-provider",
    ],
)
def test_an_unresolvable_reference_names_the_key_and_what_is_missing(
    tmp_path: Path, creds: Path, text: str, message: str
) -> None:
    tmp = str(tmp_path)
    assert load_error(tmp_path, PROVIDERS + text.replace("{tmp}", tmp)) == message.replace("{tmp}", tmp)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "primary.sasl.jaas.config = ${file:/etc/creds.properties:password}\n",
            "primary.sasl.jaas.config: ${file:/etc/creds.properties:password} refers to config provider "
            "'file', which is not declared in config.providers (declared: none); declare it with "
            "config.providers and config.providers.file.class",
        ),
        (
            "config.providers = file\n",
            f"config.providers.file.class: missing; set it to one of {FILE}, {DIRECTORY}, {ENV}",
        ),
        (
            "config.providers = vault\nconfig.providers.vault.class = com.example.VaultConfigProvider\n",
            f"config.providers.vault.class: expected one of {FILE}, {DIRECTORY}, {ENV}, got "
            "'com.example.VaultConfigProvider'; other config providers are not supported",
        ),
        (
            f"config.providers = file\nconfig.providers.file.class = {FILE}\n"
            f"config.providers.env.class = {ENV}\n",
            "config.providers.env.class: provider 'env' is not listed in config.providers (file); add it "
            "there or remove the key",
        ),
        (
            f"config.providers = file\nconfig.providers.file.class = {FILE}\n"
            "config.providers.file.param.allowed.path = /etc\n",
            "config.providers.file.param.allowed.path: unknown setting of FileConfigProvider; its only "
            "parameter is config.providers.file.param.allowed.paths",
        ),
        (
            f"config.providers = file\nconfig.providers.file.class = {FILE}\n"
            "config.providers.file.param.allowed.paths = etc\n",
            "config.providers.file.param.allowed.paths: etc is not an absolute path that exists; list "
            "existing paths",
        ),
    ],
    ids=[
        "no-providers",
        "no-class",
        "unsupported-class",
        "unlisted-provider",
        "unknown-parameter",
        "relative-allowed-path",
    ],
)
def test_provider_declarations_are_validated(tmp_path: Path, text: str, message: str) -> None:
    assert load_error(tmp_path, text) == message


def test_allowed_paths_and_the_allowlist_pattern_restrict_what_may_be_read(
    tmp_path: Path, creds: Path
) -> None:
    restricted = (
        f"config.providers = file, env\nconfig.providers.file.class = {FILE}\n"
        f"config.providers.file.param.allowed.paths = {creds.parent}\n"
        f"config.providers.env.class = {ENV}\nconfig.providers.env.param.allowlist.pattern = ^MIRROR_\n"
    )
    other = tmp_path / "other.properties"
    other.write_text(f"password = {SECRET}\n")
    env = {"MIRROR_PW": SECRET, "HOME_PW": SECRET}

    allowed = load(
        tmp_path,
        restricted
        + f"primary.sasl.jaas.config = ${{file:{creds}:password}}\n"
        + "backup.sasl.jaas.config = ${env:MIRROR_PW}\n",
        env,
    )
    assert [allowed.clusters[a].client["sasl.jaas.config"] for a in ("primary", "backup")] == [SECRET, SECRET]
    assert load_error(
        tmp_path,
        restricted + "primary.sasl.jaas.config = ${file:secrets/../other.properties:password}\n",
        env,
    ) == (
        f"primary.sasl.jaas.config: ${{file:secrets/../other.properties:password}}: {other} is not under "
        "config.providers.file.param.allowed.paths"
    )
    assert load_error(tmp_path, restricted + "primary.sasl.jaas.config = ${env:HOME_PW}\n", env) == (
        "primary.sasl.jaas.config: ${env:HOME_PW}: environment variable HOME_PW does not match "
        "config.providers.env.param.allowlist.pattern"
    )


def test_errors_about_a_credentials_file_never_show_its_values(tmp_path: Path, creds: Path) -> None:
    creds.write_text(f"password = {SECRET}\npassword = {SECRET}-2\n")
    reference = f"${{file:{creds}:password}}"

    assert load_error(tmp_path, PROVIDERS + f"primary.sasl.jaas.config = {reference}\n") == (
        f"primary.sasl.jaas.config: {reference}: password: duplicate key in {creds}: line 1 and line 2; "
        "keep one of them (each key may appear only once)"
    )
    creds.write_bytes(f"password = {SECRET}\xff\n".encode("latin-1"))
    assert load_error(tmp_path, PROVIDERS + f"primary.sasl.jaas.config = {reference}\n") == (
        f"primary.sasl.jaas.config: {reference}: the credentials file {creds} is not UTF-8 text; save it "
        "as UTF-8"
    )


def test_typed_settings_never_echo_the_value_of_a_key_that_holds_a_secret() -> None:
    view = PropertyView({"sasl.jaas.config": (SECRET, "primary.sasl.jaas.config")})

    for read in (
        lambda: view.get_bool("sasl.jaas.config", False),
        lambda: view.get_positive_int("sasl.jaas.config", 1),
        lambda: view.get_choice("sasl.jaas.config", ("a", "b")),
    ):
        with pytest.raises(ConfigError, match=re.escape("primary.sasl.jaas.config: expected ")) as caught:
            read()
        assert SECRET not in str(caught.value) and "got ******" in str(caught.value)


def test_parse_config_reads_references_relative_to_the_current_directory_without_a_path(
    tmp_path: Path, creds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    config = parse_config(
        ONE_FLOW + PROVIDERS + "primary.sasl.jaas.config = ${file:secrets/mirror.properties:password}\n",
        env={},
    )

    assert config.clusters["primary"].client["sasl.jaas.config"] == SECRET
