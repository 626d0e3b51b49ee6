# Shared compiler flags for every lesson, the helper library and the unit tests.
# pkg-config supplies the rdma-core flags, so the same Makefile works on any distribution.
CXX      ?= g++
PKGS     := libibverbs librdmacm
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++20 -Wall -Wextra -Werror -Icommon $(PKG_CFLAGS)
# Verbs structs are filled with designated initializers; the fields they leave
# out are zero by the language rules, which is what the verbs expect. g++ 12's
# -Wextra would still flag every omitted field, so that one warning is off.
CXXFLAGS += -Wno-missing-field-initializers
LDLIBS   += $(PKG_LIBS)
