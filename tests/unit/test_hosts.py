"""Addresses and the ``cluster up --hosts`` inventory: what is accepted, and the reason for what is not."""

from __future__ import annotations

import argparse

import pytest

import headwater as hw
from headwater.errors import ConfigurationError
from headwater.service.hosts import (
    Host,
    Inventory,
    advertise_address,
    bind_address,
    check_address,
    url_host,
)
from headwater.service.run import add_worker_command


@pytest.mark.parametrize(("text", "normal"), [("127.0.0.2", "127.0.0.2"), ("::1", "::1"),
                                              ("0:0:0:0:0:0:0:1", "::1"), ("localhost", "localhost")])
def test_addresses_and_resolving_names_are_accepted(text, normal):
    assert check_address(text) == normal


@pytest.mark.parametrize("text", ["10.0.0.300", "no-such-host.invalid", "", "10.0.0.1; rm -rf /", "10.0.0.1:80"])
def test_what_is_no_address_is_refused_with_an_example(text):
    with pytest.raises(hw.ConfigurationError, match="neither an IP address nor a host name that resolves"):
        check_address(text, what="--host")


def test_advertise_address_defaults_to_the_listening_one():
    assert advertise_address("127.0.0.1", None) == "127.0.0.1"
    assert advertise_address("10.77.0.3", None) == "10.77.0.3"
    assert advertise_address("0.0.0.0", "10.77.0.3") == "10.77.0.3"
    assert advertise_address("::", "fd00::3") == "fd00::3"


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_a_wildcard_host_needs_an_advertise_address(wildcard):
    with pytest.raises(hw.ConfigurationError, match="add --advertise-address"):
        advertise_address(wildcard, None)


@pytest.mark.parametrize("advertise", ["0.0.0.0", "::"])
def test_a_wildcard_cannot_be_advertised(advertise):
    with pytest.raises(hw.ConfigurationError, match="wildcard that names no host"):
        advertise_address("0.0.0.0", advertise)


def test_the_worker_command_checks_host_as_it_parses():
    parser = argparse.ArgumentParser()
    add_worker_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["worker", "--data-dir", "d", "--host", "0:0::0", "--advertise-address", "10.0.0.5"])
    assert (args.host, args.advertise_address) == ("::", "10.0.0.5")
    assert parser.parse_args(["worker", "--data-dir", "d"]).host == "127.0.0.1"  # the default is unchanged
    with pytest.raises(argparse.ArgumentTypeError, match="neither an IP address"):
        bind_address("10.0.0.256")


def test_spark_master_urls_take_an_address_ipv6_included_and_nothing_more():
    from headwater.service.run import spark_master

    for good in ("local", "local[*]", "local[4]", "spark://10.0.0.5:7077", "spark://[::1]:7077", "spark://localhost:7077"):
        assert spark_master(good) == good
    for bad in ("spark://h:7077/x", "spark://a@10.0.0.5:7077", "spark://10.0.0.5:99999", "spark://10.0.0.256:7077",
                "spark://10.0.0.5", "local[*] --conf spark.x=1", "yarn"):
        with pytest.raises(argparse.ArgumentTypeError):
            spark_master(bad)


def test_the_console_command_checks_host_as_it_parses(capsys):
    from headwater.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["ui", "--data-dir", "d", "--host", "10.0.0.256"])
    assert exit_.value.code == 2 and "argument --host: --host '10.0.0.256' is neither" in capsys.readouterr().err


def test_the_console_served_for_a_data_directory_prints_where_browsers_reach_it(tmp_path):
    from headwater.cli import main
    from headwater.cli.ui import console_url

    def url(*flags: str) -> str:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        from headwater.cli.ui import add_ui_command

        add_ui_command(sub)
        return console_url(parser.parse_args(["ui", "--data-dir", str(tmp_path), *flags]))

    assert url() == "http://127.0.0.1:8770/ui/"
    assert url("--host", "0.0.0.0", "--advertise-address", "10.0.0.5", "--port", "9000") == "http://10.0.0.5:9000/ui/"
    assert url("--host", "::1") == "http://[::1]:8770/ui/"
    with pytest.raises(ConfigurationError, match="add --advertise-address"):
        url("--host", "0.0.0.0")
    assert main(["ui", "--data-dir", str(tmp_path), "--host", "0.0.0.0"]) != 0  # refused before serving


def test_ipv6_literals_are_bracketed_in_urls():
    assert url_host("fd00::1") == "[fd00::1]" and url_host("db.internal") == "db.internal"


def test_an_inventory_places_each_role_and_defaults_to_the_masters_host():
    inv = Inventory.parse({"hosts": {"a": "127.0.0.2", "b": {"address": "127.0.0.3"}, "c": "127.0.0.4"},
                           "roles": {"master": "a", "postgres": "b", "workers": ["b", "c"]}})
    a, b, c = Host("a", "127.0.0.2"), Host("b", "127.0.0.3"), Host("c", "127.0.0.4")
    assert (inv.master, inv.postgres, inv.spark_master, inv.spark_workers) == (a, b, a, (a,))
    assert [inv.worker_host(i) for i in range(3)] == [b, c, b]
    assert inv.standby is None  # a standby is started only where the inventory names one
    with_standby = Inventory.parse({"hosts": {"a": "127.0.0.2", "b": "127.0.0.3"},
                                    "roles": {"master": "a", "standby": "b"}})
    assert with_standby.standby == Host("b", "127.0.0.3")


def test_cluster_up_refuses_a_standby_without_postgresql_or_on_the_masters_address(tmp_path):
    from headwater.errors import ConfigurationError
    from headwater.service import cluster

    same = Inventory.parse({"hosts": {"a": "127.0.0.2"}, "roles": {"master": "a", "standby": "a"}})
    with pytest.raises(ConfigurationError, match="metadata in PostgreSQL: add --postgres"):
        cluster.up(tmp_path, hosts=same)
    with pytest.raises(ConfigurationError, match=r"would both listen on 127\.0\.0\.2:8765"):
        cluster.up(tmp_path, hosts=same, postgres=True)
    assert not (tmp_path / "cluster").exists()  # refused before anything started


def test_the_local_inventory_is_everything_on_loopback():
    inv = Inventory.local()
    assert {inv.master.address, inv.postgres.address, *(h.address for h in inv.workers)} == {"127.0.0.1"}


def test_an_inventory_file_is_read(tmp_path):
    file = tmp_path / "hosts.toml"
    file.write_text('[hosts]\nh1 = "127.0.0.2"\n[roles]\nmaster = "h1"\nspark-workers = ["h1"]\n')
    assert Inventory.load(file).spark_workers == (Host("h1", "127.0.0.2"),)


@pytest.mark.parametrize(("doc", "fragment"), [
    ({"hosts": {"a": "127.0.0.2"}}, "expected the tables [hosts]"),
    ({"hosts": {"a": "127.0.0.2"}, "roles": {"master": "a"}, "extra": {}}, "not ['extra']"),
    ({"hosts": {"a": "127.0.0.2"}, "roles": {"worker": "a", "master": "a"}}, "unknown role(s) ['worker']"),
    ({"hosts": {"a": "127.0.0.2"}, "roles": {"workers": ["a"]}}, "needs master ="),
    ({"hosts": {"a": "127.0.0.2"}, "roles": {"master": "b"}}, "names ['b'], which [hosts] does not list"),
    ({"hosts": {"a": "127.0.0.2"}, "roles": {"master": ["a"]}}, "expected one host name"),
    ({"hosts": {"a": "127.0.0.2"}, "roles": {"master": "a", "workers": []}}, "expected a list of host names"),
    ({"hosts": {"a": "0.0.0.0"}, "roles": {"master": "a"}}, "wildcard that names no host"),
    ({"hosts": {"a": "10.1.2.300"}, "roles": {"master": "a"}}, "neither an IP address"),
    ({"hosts": {"a": {"address": "127.0.0.2", "port": 1}}, "roles": {"master": "a"}}, "expected an address, or"),
    ({"hosts": {"a": {"address": "127.0.0.2", "netns": "../x"}}, "roles": {"master": "a"}},
     "is not a network namespace name"),
    ({"hosts": {"a": {"address": "127.0.0.2", "netns": "hw-no-such-ns"}}, "roles": {"master": "a"}},
     "no network namespace hw-no-such-ns"),
])
def test_a_bad_inventory_is_refused_with_the_reason(doc, fragment):
    with pytest.raises(hw.ConfigurationError, match="the inventory: ") as caught:
        Inventory.parse(doc)
    assert fragment in str(caught.value)


def test_an_unreadable_inventory_file_is_refused(tmp_path):
    (tmp_path / "bad.toml").write_text("[hosts\n")
    with pytest.raises(hw.ConfigurationError, match="cannot read the inventory"):
        Inventory.load(tmp_path / "bad.toml")
    with pytest.raises(hw.ConfigurationError, match="cannot read the inventory"):
        Inventory.load(tmp_path / "missing.toml")


def test_a_host_in_a_namespace_runs_its_commands_there():
    assert Host("h", "10.77.0.2", "hw-x-2").command(["true"]) == ["ip", "netns", "exec", "hw-x-2", "true"]
    assert Host("h", "127.0.0.1").command(["true"]) == ["true"]
