# cmake -DIN=file -DOUT=file.c [-DNAME=symbol] -P embed_text.cmake: a C array
# holding IN's bytes, NUL-terminated (NAME defaults to fm_builtin_samples_text).
if(NOT NAME)
  set(NAME fm_builtin_samples_text)
endif()
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\nconst char ${NAME}[] = {${bytes}0x00};\n")
