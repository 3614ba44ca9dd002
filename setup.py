"""One installed package, ``ctpipe``, built from the repository's top-level folders.

``components/`` installs as ``ctpipe.components`` and ``pipelines/`` as ``ctpipe.pipelines`` (the layout
kubeflow/pipelines-components uses): nothing but ``ctpipe`` lands at the top of site-packages. Everything
else about the distribution is in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = {"ctpipe.components": "components", "ctpipe.pipelines": "pipelines"}  # ctpipe.PARTS, each its folder

# ctpipe/ itself: the package root, task.py and ctpipe.testing (what the tests and benchmarks share).
packages = ["ctpipe"] + [f"ctpipe.{sub}" for sub in find_packages("ctpipe")]
package_dir = {"ctpipe": "ctpipe"}
for name, folder in FOLDERS.items():
    package_dir[name] = folder
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
