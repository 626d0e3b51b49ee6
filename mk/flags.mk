# Shared compiler flags for every lesson, the helper library and the unit tests.
# pkg-config supplies the rdma-core flags, so the same Makefile works on any distribution.
#
# CXXFLAGS is yours: `make CXXFLAGS='-O1 -g -fsanitize=address,undefined'`
# (or the same in the environment) replaces the default -O2 -g, and the
# flags the workbook needs (C++20, warnings as errors, common/, rdma-core's
# pkg-config flags) are appended to it either way (override: a command-line
# value would otherwise replace them too). The same for LDLIBS.
CXX      ?= g++
PKGS     := libibverbs librdmacm
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CXXFLAGS ?= -O2 -g
override CXXFLAGS += -std=c++20 -Wall -Wextra -Werror -Icommon $(PKG_CFLAGS)
# Verbs structs are filled with designated initializers; the fields they leave
# out are zero by the language rules, which is what the verbs expect. g++ 12's
# -Wextra would still flag every omitted field, so that one warning is off.
override CXXFLAGS += -Wno-missing-field-initializers
override LDLIBS   += $(PKG_LIBS)
